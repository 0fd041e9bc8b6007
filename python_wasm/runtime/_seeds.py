"""Each run's own random state, drawn from the host's entropy.

The snapshot baked in one state for `random` and, on the data image, for numpy's
global RandomState (what `np.random.rand()` and friends, pandas' `sample()` and
scikit-learn's `random_state=None` draw from). Every run gets new state, except a
session's later runs, which keep theirs (a seed the code set holds across runs).

Both generators are a Mersenne Twister: 624 32-bit words and a position in them.
Seeding one runs init_by_array over words drawn from the host, and numpy's
`seed()` adds a dozen array operations around it (a third of the data guest's
per-run set-up). Where numpy is imported before the snapshot (the data image),
`init` finds each generator's words in memory once, and a run writes new words
from `os.urandom` straight there, its position at the end (so the first draw
twists the whole state, as after seeding): uniformly random state, as
init_by_array's, for the cost of one copy. numpy's RandomState also holds the
second Gaussian of a pair for its next draw (a skill's pages may hold one, made
at its import): the run clears it, as `seed()` does. A session's reseeded run
(its first, a fork's first) takes numpy's own `seed()`, which also forgets a seed
sequence the session's code gave it. Without numpy (the stdlib image), or when
`init` does not find the state where expected, every run seeds as before.
"""

import _random
import os
import random
import struct
import sys

_WORDS = 624  # the Mersenne Twister's state words (N in CPython's and numpy's C)
_STATE_BYTES = _WORDS * 4
_AT_END = _WORDS.to_bytes(4, "little")  # the position that makes the next draw twist first
_seed = _random.Random.seed

# Views of each generator's words and position in this interpreter's memory
# (memoryviews of numpy arrays over them); None where each run seeds instead.
_random_state: "tuple[memoryview, memoryview] | None" = None
_numpy_state: "tuple[memoryview, memoryview, memoryview] | None" = None  # and its held Gaussian


class _Memory:
    """`size` bytes at `address` of the interpreter's own memory, for numpy.asarray
    (the array interface: the guest has no working ctypes)."""

    def __init__(self, address: int, size: int) -> None:
        self.__array_interface__ = {"version": 3, "shape": (size,), "typestr": "|u1", "data": (address, False)}


def _view(numpy, address: int, size: int) -> memoryview:
    return memoryview(numpy.asarray(_Memory(address, size)))


def _locate(numpy, owner: object, words: bytes, position_at: int) -> "tuple[memoryview, memoryview] | None":
    """Views of `owner`'s state words (found once in its first 4 KiB, where the C
    struct holds them inline) and of its position, `position_at` bytes from the
    words' start; None unless found exactly once."""
    start = id(owner)  # CPython: an object's address in the interpreter's memory
    window = bytes(_view(numpy, start, 4096))
    found = window.find(words)
    if found < 0 or window.find(words, found + 1) >= 0:
        return None
    at = start + found
    return _view(numpy, at, _STATE_BYTES), _view(numpy, at + position_at, 4)


def _random_words() -> bytes:
    return b"".join(w.to_bytes(4, "little") for w in random.getstate()[1][:_WORDS])


def init() -> None:
    """Before the snapshot: seed both generators once (numpy's then holds no Gaussian and
    names no seed sequence) and find their state, checked by writing new state and
    reading it back through each generator's own `getstate`."""
    global _random_state, _numpy_state
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return
    rand = numpy.random.mtrand._rand
    _seed(random._inst, None)
    try:
        found_random = _locate(numpy, random._inst, _random_words(), -4)  # CPython's RandomObject: index, state[N]
        held = _held_gaussian(numpy, rand)
        rand.seed(numpy.frombuffer(os.urandom(_STATE_BYTES), numpy.uint32))
        found_numpy = _locate(numpy, rand._bit_generator, rand.get_state()[1].tobytes(), _STATE_BYTES)  # key[N], pos
    except (AttributeError, TypeError, ValueError):
        return
    if found_random is not None:
        _refill(found_random)
        state = random.getstate()[1]
        if _random_words() == bytes(found_random[0]) and state[_WORDS] == _WORDS:
            _random_state = found_random
    if found_numpy is not None and held is not None:
        rand.standard_normal()  # holds a Gaussian again: the refill below must clear it
        _refill(found_numpy + (held,))
        state = rand.get_state()
        if state[1].tobytes() == bytes(found_numpy[0]) and state[2:] == (_WORDS, 0, 0.0):
            _numpy_state = found_numpy + (held,)


def _held_gaussian(numpy, rand) -> "memoryview | None":
    """A view of numpy's RandomState's held Gaussian (C: `int has_gauss; double gauss;`),
    found by drawing one and looking for its value; None unless found exactly once."""
    rand.seed(1)
    rand.standard_normal()
    flag, value = rand.get_state()[3:]
    start = id(rand)
    window = bytes(_view(numpy, start, 4096))
    pattern = struct.pack("<d", value)
    found = window.find(pattern)
    if flag != 1 or found < 8 or window.find(pattern, found + 1) >= 0:
        return None
    for gap in (4, 8):  # the flag, then the double (8-aligned or not)
        if window[found - gap : found - gap + 4] == b"\x01\x00\x00\x00":
            return _view(numpy, start + found - gap, gap + 8)
    return None


def _refill(state: "tuple[memoryview, ...]") -> None:
    """New words, the position at their end, and (numpy's) no Gaussian held."""
    words, position, *held = state
    words[:] = os.urandom(_STATE_BYTES)
    words[3] |= 0x80  # the first word's top bit, as init_by_array sets it: never the all-zero state
    position[:] = _AT_END
    for view in held:
        view[:] = bytes(len(view))


def fresh(session: bool) -> None:
    """New random state for this run; `session`: a session's reseeded run, whose numpy
    state takes numpy's own seed() (see the module's docstring)."""
    if _random_state is not None:
        _refill(_random_state)
    else:
        _seed(random._inst, None)  # the C seeds from the host's entropy (random.seed() without its Python layer)
    random._inst.gauss_next = None
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return
    if _numpy_state is not None and not session:
        _refill(_numpy_state)
    else:
        # Keyed by 624 words from the host's entropy (init_by_array): its whole
        # state. seed() with no argument draws a SeedSequence instead (~0.4 ms a run).
        numpy.random.seed(numpy.frombuffer(os.urandom(_STATE_BYTES), numpy.uint32))

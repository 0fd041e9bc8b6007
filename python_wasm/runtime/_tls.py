"""`_ssl` for a guest without OpenSSL: `import ssl` works, TLS is the host's.

The guest has no sockets, so it never speaks TLS itself: HTTPS goes through
the host (runtime/http.py), which verifies certificates against its own
trust store. Code and libraries still import `ssl` at start, read its
constants and build contexts (`ssl.create_default_context()`) to hand to an
HTTP client; all of that works here. A context keeps its settings; passed to
`urllib.request.urlopen` it is accepted and the host does the TLS. What needs
TLS in this process (wrapping a socket or a memory BIO, a client certificate)
raises `ssl.SSLError` with `TLS_UNAVAILABLE` when called.

The constants are OpenSSL 3.0's values (as CPython's `_ssl` built against it
exports them), so code that compares or combines flags behaves the same.
`_compat.install_ssl` installs this module as `_ssl` only when the
interpreter has no `_ssl` of its own.
"""

import os

TLS_UNAVAILABLE = (
    "TLS connections cannot be made inside the sandbox (it has no sockets): make HTTPS requests "
    "with urllib.request or runtime.http, which the host carries out and verifies"
)

OPENSSL_VERSION = "OpenSSL 3.0.0 (the host's TLS: wasmrun sandbox)"
OPENSSL_VERSION_INFO = (3, 0, 0, 0, 0)
OPENSSL_VERSION_NUMBER = 0x30000000
_OPENSSL_API_VERSION = OPENSSL_VERSION_INFO
_DEFAULT_CIPHERS = "@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM"

CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED = 0, 1, 2
ENCODING_PEM, ENCODING_DER = 1, 2
PROTOCOL_SSLv23 = PROTOCOL_TLS = 2
PROTOCOL_TLSv1, PROTOCOL_TLSv1_1, PROTOCOL_TLSv1_2 = 3, 4, 5
PROTOCOL_TLS_CLIENT, PROTOCOL_TLS_SERVER = 16, 17
PROTO_MINIMUM_SUPPORTED, PROTO_MAXIMUM_SUPPORTED = -2, -1
PROTO_SSLv3, PROTO_TLSv1, PROTO_TLSv1_1, PROTO_TLSv1_2, PROTO_TLSv1_3 = 768, 769, 770, 771, 772

HAS_SNI = HAS_ECDH = HAS_ALPN = HAS_TLS_UNIQUE = True
HAS_TLSv1 = HAS_TLSv1_1 = HAS_TLSv1_2 = HAS_TLSv1_3 = True
HAS_NPN = HAS_SSLv2 = HAS_SSLv3 = False
HAS_NEVER_CHECK_COMMON_NAME = True
HAS_PSK = HAS_PSK_TLS13 = HAS_PHA = False

OP_ALL = 0x80000050
OP_NO_SSLv2 = OP_SINGLE_DH_USE = OP_SINGLE_ECDH_USE = 0
OP_NO_SSLv3 = 0x2000000
OP_NO_TLSv1 = 0x4000000
OP_NO_TLSv1_1 = 0x10000000
OP_NO_TLSv1_2 = 0x8000000
OP_NO_TLSv1_3 = 0x20000000
OP_NO_TICKET = 0x4000
OP_NO_COMPRESSION = 0x20000
OP_CIPHER_SERVER_PREFERENCE = 0x400000
OP_ENABLE_MIDDLEBOX_COMPAT = 0x100000
OP_NO_RENEGOTIATION = 0x40000000
OP_IGNORE_UNEXPECTED_EOF = 0x80
OP_LEGACY_SERVER_CONNECT = 0x4
OP_ENABLE_KTLS = 0x8

HOSTFLAG_ALWAYS_CHECK_SUBJECT = 1
HOSTFLAG_NO_WILDCARDS = 2
HOSTFLAG_NO_PARTIAL_WILDCARDS = 4
HOSTFLAG_MULTI_LABEL_WILDCARDS = 8
HOSTFLAG_SINGLE_LABEL_SUBDOMAINS = 16
HOSTFLAG_NEVER_CHECK_SUBJECT = 32

VERIFY_DEFAULT = 0
VERIFY_CRL_CHECK_LEAF = 4
VERIFY_CRL_CHECK_CHAIN = 12
VERIFY_X509_STRICT = 32
VERIFY_ALLOW_PROXY_CERTS = 64
VERIFY_X509_TRUSTED_FIRST = 32768
VERIFY_X509_PARTIAL_CHAIN = 524288

SSL_ERROR_SSL, SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE, SSL_ERROR_WANT_X509_LOOKUP = 1, 2, 3, 4
SSL_ERROR_SYSCALL, SSL_ERROR_ZERO_RETURN, SSL_ERROR_WANT_CONNECT, SSL_ERROR_EOF = 5, 6, 7, 8
SSL_ERROR_INVALID_ERROR_CODE = 10

ALERT_DESCRIPTION_CLOSE_NOTIFY = 0
ALERT_DESCRIPTION_UNEXPECTED_MESSAGE = 10
ALERT_DESCRIPTION_BAD_RECORD_MAC = 20
ALERT_DESCRIPTION_RECORD_OVERFLOW = 22
ALERT_DESCRIPTION_DECOMPRESSION_FAILURE = 30
ALERT_DESCRIPTION_HANDSHAKE_FAILURE = 40
ALERT_DESCRIPTION_BAD_CERTIFICATE = 42
ALERT_DESCRIPTION_UNSUPPORTED_CERTIFICATE = 43
ALERT_DESCRIPTION_CERTIFICATE_REVOKED = 44
ALERT_DESCRIPTION_CERTIFICATE_EXPIRED = 45
ALERT_DESCRIPTION_CERTIFICATE_UNKNOWN = 46
ALERT_DESCRIPTION_ILLEGAL_PARAMETER = 47
ALERT_DESCRIPTION_UNKNOWN_CA = 48
ALERT_DESCRIPTION_ACCESS_DENIED = 49
ALERT_DESCRIPTION_DECODE_ERROR = 50
ALERT_DESCRIPTION_DECRYPT_ERROR = 51
ALERT_DESCRIPTION_PROTOCOL_VERSION = 70
ALERT_DESCRIPTION_INSUFFICIENT_SECURITY = 71
ALERT_DESCRIPTION_INTERNAL_ERROR = 80
ALERT_DESCRIPTION_USER_CANCELLED = 90
ALERT_DESCRIPTION_NO_RENEGOTIATION = 100
ALERT_DESCRIPTION_UNSUPPORTED_EXTENSION = 110
ALERT_DESCRIPTION_CERTIFICATE_UNOBTAINABLE = 111
ALERT_DESCRIPTION_UNRECOGNIZED_NAME = 112
ALERT_DESCRIPTION_BAD_CERTIFICATE_STATUS_RESPONSE = 113
ALERT_DESCRIPTION_BAD_CERTIFICATE_HASH_VALUE = 114
ALERT_DESCRIPTION_UNKNOWN_PSK_IDENTITY = 115

err_codes_to_names = {}
err_names_to_codes = {}
lib_codes_to_names = {}


class SSLError(OSError):
    """An error in the SSL implementation."""

    library = None
    reason = None

    def __str__(self):
        if len(self.args) >= 2 and isinstance(self.args[1], str):
            return self.args[1]
        return super().__str__()


class SSLZeroReturnError(SSLError):
    """SSL/TLS session closed cleanly."""


class SSLWantReadError(SSLError):
    """Non-blocking SSL socket needs to read more data."""


class SSLWantWriteError(SSLError):
    """Non-blocking SSL socket needs to write more data."""


class SSLSyscallError(SSLError):
    """System error when attempting SSL operation."""


class SSLEOFError(SSLError):
    """SSL/TLS connection terminated abruptly."""


class SSLCertVerificationError(SSLError, ValueError):
    """A certificate could not be verified."""

    verify_code = None
    verify_message = None


for _cls in (SSLError, SSLZeroReturnError, SSLWantReadError, SSLWantWriteError, SSLSyscallError,
             SSLEOFError, SSLCertVerificationError):
    _cls.__module__ = "ssl"


def _unavailable():
    return SSLError(SSL_ERROR_SSL, TLS_UNAVAILABLE)


# The objects `ssl.Purpose` and `ssl.enum_*` look up: (nid, short name, long name, OID).
_OBJECTS = (
    (129, "serverAuth", "TLS Web Server Authentication", "1.3.6.1.5.5.7.3.1"),
    (130, "clientAuth", "TLS Web Client Authentication", "1.3.6.1.5.5.7.3.2"),
    (131, "codeSigning", "Code Signing", "1.3.6.1.5.5.7.3.3"),
    (132, "emailProtection", "E-mail Protection", "1.3.6.1.5.5.7.3.4"),
    (133, "timeStamping", "Time Stamping", "1.3.6.1.5.5.7.3.8"),
    (180, "OCSPSigning", "OCSP Signing", "1.3.6.1.5.5.7.3.9"),
)


def txt2obj(txt, name=False):
    if not isinstance(txt, str):
        raise TypeError(f"txt2obj() argument 'txt' must be str, not {type(txt).__name__}")
    for obj in _OBJECTS:
        if txt == obj[3] or (name and txt in (obj[1], obj[2])):
            return obj
    raise ValueError(f"unknown object '{txt}'")


def nid2obj(nid):
    if not isinstance(nid, int):
        raise TypeError(f"'{type(nid).__name__}' object cannot be interpreted as an integer")
    if nid < 0:
        raise ValueError("NID must be positive.")
    for obj in _OBJECTS:
        if obj[0] == nid:
            return obj
    raise ValueError(f"unknown NID {nid}")


def RAND_bytes(n):
    if n < 0:
        raise ValueError("num must be positive")
    return os.urandom(n)


def RAND_pseudo_bytes(n):
    return RAND_bytes(n), True


def RAND_status():
    return True


def RAND_add(string, entropy):
    if not isinstance(string, (str, bytes, bytearray, memoryview)):
        raise TypeError("a bytes-like object or str is required")
    float(entropy)


def get_sigalgs():
    return []  # the guest negotiates nothing: the host's TLS picks the signature algorithms


def get_default_verify_paths():
    return ("SSL_CERT_FILE", "/etc/ssl/cert.pem", "SSL_CERT_DIR", "/etc/ssl/certs")


class MemoryBIO:
    """An in-memory buffer, as OpenSSL's BIO (usable on its own; TLS over it is not)."""

    def __init__(self):
        self._data = bytearray()
        self._eof_written = False

    @property
    def pending(self):
        return len(self._data)

    @property
    def eof(self):
        return self._eof_written and not self._data

    def read(self, size=-1):
        size = len(self._data) if size < 0 else min(size, len(self._data))
        out = bytes(self._data[:size])
        del self._data[:size]
        return out

    def write(self, data):
        if self._eof_written:
            raise SSLError(SSL_ERROR_SSL, "cannot write() after write_eof()")
        view = memoryview(data).cast("B")
        self._data += view
        return len(view)

    def write_eof(self):
        self._eof_written = True


class SSLSession:
    def __new__(cls, *args, **kwargs):
        raise TypeError("cannot create '_ssl.SSLSession' instances")


def _check_mode(value):
    if value not in (CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED):
        raise ValueError("invalid value for verify_mode")
    return value


class _SSLContext:
    """A TLS configuration: kept and checked as OpenSSL's, used by the host's client."""

    def __new__(cls, protocol):
        if protocol not in (PROTOCOL_TLS, PROTOCOL_TLSv1, PROTOCOL_TLSv1_1, PROTOCOL_TLSv1_2,
                            PROTOCOL_TLS_CLIENT, PROTOCOL_TLS_SERVER):
            raise ValueError(f"invalid or unsupported protocol version {protocol}")
        self = object.__new__(cls)
        client = protocol == PROTOCOL_TLS_CLIENT
        self._protocol = protocol
        self._options = OP_ALL | OP_NO_SSLv3 | OP_NO_COMPRESSION | OP_CIPHER_SERVER_PREFERENCE \
            | OP_ENABLE_MIDDLEBOX_COMPAT | OP_NO_SSLv2 | OP_SINGLE_DH_USE | OP_SINGLE_ECDH_USE
        self._verify_mode = CERT_REQUIRED if client else CERT_NONE
        self._check_hostname = client
        self._verify_flags = VERIFY_X509_TRUSTED_FIRST
        self._minimum_version = PROTO_MINIMUM_SUPPORTED
        self._maximum_version = PROTO_MAXIMUM_SUPPORTED
        self._host_flags = HOSTFLAG_NO_PARTIAL_WILDCARDS
        self._callback = None
        self.sni_callback = None
        self.keylog_filename = None
        self.post_handshake_auth = False
        self.num_tickets = 2
        self.security_level = 2
        self._ciphers = _DEFAULT_CIPHERS
        self._ca_data = []
        return self

    protocol = property(lambda self: self._protocol)

    @property
    def options(self):
        return self._options

    @options.setter
    def options(self, value):
        self._options = int(value)

    @property
    def verify_mode(self):
        return self._verify_mode

    @verify_mode.setter
    def verify_mode(self, value):
        value = _check_mode(value)
        if value == CERT_NONE and self._check_hostname:
            raise ValueError("Cannot set verify_mode to CERT_NONE when check_hostname is enabled.")
        self._verify_mode = value

    @property
    def check_hostname(self):
        return self._check_hostname

    @check_hostname.setter
    def check_hostname(self, value):
        value = bool(value)
        if value and self._verify_mode == CERT_NONE:
            self._verify_mode = CERT_REQUIRED
        self._check_hostname = value

    @property
    def verify_flags(self):
        return self._verify_flags

    @verify_flags.setter
    def verify_flags(self, value):
        self._verify_flags = int(value)

    @property
    def minimum_version(self):
        return self._minimum_version

    @minimum_version.setter
    def minimum_version(self, value):
        self._minimum_version = int(value)

    @property
    def maximum_version(self):
        return self._maximum_version

    @maximum_version.setter
    def maximum_version(self, value):
        self._maximum_version = int(value)

    @property
    def _msg_callback(self):
        return self._callback

    @_msg_callback.setter
    def _msg_callback(self, callback):
        if callback is not None and not callable(callback):
            raise TypeError(f"{callback} is not callable.")
        self._callback = callback

    def set_ciphers(self, ciphers):
        if not isinstance(ciphers, str):
            raise TypeError("set_ciphers() argument must be str")
        self._ciphers = ciphers

    def get_ciphers(self):
        return []

    def set_ciphersuites(self, ciphersuites):
        if not isinstance(ciphersuites, str):
            raise TypeError("set_ciphersuites() argument must be str")

    def set_groups(self, groups):
        if not isinstance(groups, str):
            raise TypeError("set_groups() argument must be str")

    def get_groups(self, *, include_aliases=False):
        return []

    def set_client_sigalgs(self, sigalgs):
        if not isinstance(sigalgs, str):
            raise TypeError("set_client_sigalgs() argument must be str")

    set_server_sigalgs = set_client_sigalgs

    def _set_alpn_protocols(self, protos):
        self._alpn = bytes(protos)

    def set_default_verify_paths(self):
        pass  # the host verifies against its own trust store

    def load_verify_locations(self, cafile=None, capath=None, cadata=None):
        if cafile is None and capath is None and cadata is None:
            raise TypeError("cafile, capath and cadata cannot be all omitted")
        for path in (cafile, capath):
            if path is not None:
                os.stat(path)  # a missing file fails here as it does with OpenSSL
        if cadata is not None:
            if not isinstance(cadata, (str, bytes, bytearray, memoryview)):
                raise TypeError("cadata should be an ASCII string or a bytes-like object")
            self._ca_data.append(cadata)

    def load_cert_chain(self, certfile, keyfile=None, password=None):
        raise _unavailable()

    def load_dh_params(self, path):
        os.stat(path)

    def set_ecdh_curve(self, name):
        if not isinstance(name, (str, bytes)):
            raise TypeError("set_ecdh_curve() argument must be str or bytes")

    def cert_store_stats(self):
        return {"x509": 0, "crl": 0, "x509_ca": 0}

    def get_ca_certs(self, binary_form=False):
        return []

    def session_stats(self):
        keys = ("number", "connect", "connect_good", "connect_renegotiate", "accept", "accept_good",
                "accept_renegotiate", "hits", "misses", "timeouts", "cache_full")
        return dict.fromkeys(keys, 0)

    def set_psk_client_callback(self, callback, identity_hint=None):
        raise _unavailable()

    def set_psk_server_callback(self, callback, identity_hint=None):
        raise _unavailable()

    def _wrap_socket(self, *args, **kwargs):
        raise _unavailable()

    def _wrap_bio(self, *args, **kwargs):
        raise _unavailable()

"""`python -m wasmrun.sandbox.images [-q]`: make the data image (`make guest`), once, outside requests."""

import logging
import sys
import time

from python_wasm import dataimage as unpacked
from wasmrun.sandbox.images.dataimage import data_engine, ready_image


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    t0 = time.monotonic()
    image = ready_image(data_engine(), quiet="-q" in sys.argv)
    print(f"data image ready in {time.monotonic() - t0:.1f} s: {unpacked.image_path(image.interp)}")


if __name__ == "__main__":
    main()

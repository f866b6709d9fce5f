"""Add bytecode to a zip of Python modules (Spark's `pyspark.zip`), once.

Spark starts its Python processes with `pyspark.zip` first on their path, and
Python never writes bytecode into a zip: every Python process Spark starts
compiles the pyspark modules it imports again. For the streaming source's
planner that is about 2 s of CPU before it connects back to the JVM, which
gives it 10 s (fixed in `PythonWorkerFactory`): on a busy machine the query
fails with "Python worker failed to connect back". With bytecode next to each
module (`foo.pyc` beside `foo.py`, unchecked-hash pycs, which zipimport loads
without comparing times) the same import takes a quarter of that.

Usage: python scripts/compile_zip.py PATH.zip   (a zip that has bytecode is left alone)
"""

from __future__ import annotations

import os
import py_compile
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path


def compile_zip(path: Path) -> bool:
    """True when bytecode was added; False when the zip had it already."""
    with zipfile.ZipFile(path) as src:
        names = src.namelist()
        if any(n.endswith(".pyc") for n in names):
            return False
        with tempfile.TemporaryDirectory() as tmp:
            src.extractall(tmp)
            out = path.with_suffix(".zip.tmp")
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
                for info in src.infolist():
                    dst.writestr(info, src.read(info))
                    if not info.filename.endswith(".py") or "/tests/" in info.filename:
                        continue
                    source = os.path.join(tmp, info.filename)
                    compiled = source + "c"
                    try:
                        py_compile.compile(
                            source,
                            cfile=compiled,
                            dfile=f"{path}/{info.filename}",
                            doraise=True,
                            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                        )
                    except py_compile.PyCompileError:
                        continue  # a module for another Python version: left as source
                    dst.write(compiled, info.filename + "c")
    os.replace(out, path)
    return True


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")  # what the compiler says of pyspark's own code
    for arg in argv:
        if compile_zip(Path(arg)):
            print(f"compiled the modules of {arg}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

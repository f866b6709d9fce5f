"""The jars of the Java clients nobody here wrote that the interop tests run, fetched with
Maven from Maven Central into a cache outside the repository.

Each set is a pom beside this file, and its jars are what `mvn dependency:copy-dependencies`
copies for it:

- `kafka-tools` (`kafka-tools.pom.xml`): Apache Kafka's Java client and command-line
  tools (tests/e2e/test_kafka_java.py);
- `spark-kafka` (`spark-kafka.pom.xml`): Spark's own Kafka source and what it needs
  beside pyspark's jars (tests/spark/test_kafka_source.py).

A set lives in `~/.cache/epochlog-interop/<set>-<digest of its pom>/`, so a changed pom
is fetched anew; it is fetched into a directory of its own and renamed when complete.
`make interop-jars` (which `make test` runs first) fetches every set that is missing
(`python -m tests.interop.jars`); with all of them there it asks nothing of the network.
The tests only look them up (`located`): a missing set fails its tests, saying how to
fetch it, and is never skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).resolve().parent
CACHE: Final = Path.home() / ".cache" / "epochlog-interop"
KAFKA_TOOLS: Final = "kafka-tools"
SPARK_KAFKA: Final = "spark-kafka"
SETS: Final = (KAFKA_TOOLS, SPARK_KAFKA)
FETCH_TIMEOUT_S: Final = 1800.0
"""A hang detector for one Maven run; a cold fetch takes seconds to a minute."""
_COMPLETE: Final = ".complete"


class JarsMissing(RuntimeError):
    """A set of jars is not in the cache, or Maven could not fetch it."""


def pom(name: str) -> Path:
    return HERE / f"{name}.pom.xml"


def directory(name: str, cache: Path = CACHE) -> Path:
    """Where set `name` is kept: named after its pom's content."""
    digest = hashlib.sha256(pom(name).read_bytes()).hexdigest()[:12]
    return cache / f"{name}-{digest}"


def located(name: str, cache: Path = CACHE) -> Path:
    """The directory of set `name`, fetched before; JarsMissing says how to fetch it."""
    found = directory(name, cache)
    if not (found / _COMPLETE).is_file():
        raise JarsMissing(
            f"the {name} jars are not in {found}: `make interop-jars` fetches them with Maven "
            f"(`make test` runs it first), or `.venv/bin/python -m tests.interop.jars`"
        )
    return found


def jars(name: str, cache: Path = CACHE) -> list[Path]:
    """Every jar of set `name`, by file name."""
    return sorted(located(name, cache).glob("*.jar"))


def fetch(name: str, cache: Path = CACHE) -> Path:
    """Set `name`'s directory, fetched with Maven when it is not complete yet."""
    target = directory(name, cache)
    if (target / _COMPLETE).is_file():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsMissing(
            f"the {name} jars need Maven (`mvn`) to be fetched: apt-get install maven"
        )
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom(name)),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
    ]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise JarsMissing(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0 or not any(partial.glob("*.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        output = done.stdout + done.stderr
        errors = [line for line in output.splitlines() if "ERROR" in line]
        raise JarsMissing(
            f"{' '.join(cmd)} failed ({done.returncode}): "
            + (" / ".join(errors[:3]) or output[-2000:])
        )
    (partial / _COMPLETE).write_text("\n".join(sorted(p.name for p in partial.glob("*.jar"))))
    if (target / _COMPLETE).is_file():
        shutil.rmtree(partial, ignore_errors=True)  # another fetch finished first
        return target
    shutil.rmtree(target, ignore_errors=True)  # what a fetch that was cut short left
    partial.rename(target)
    return target


def main(argv: list[str]) -> int:
    """Fetch every missing set; with `--check`, only say (exit 1) whether one is missing."""
    if "--check" in argv:
        missing = [name for name in SETS if not (directory(name) / _COMPLETE).is_file()]
        for name in missing:
            print(f"interop-jars: {name} is not in {directory(name)}", file=sys.stderr)
        return 1 if missing else 0
    for name in SETS:
        try:
            found = fetch(name)
        except JarsMissing as exc:
            print(f"interop-jars: {exc}", file=sys.stderr)
            return 1
        print(f"interop-jars: {name} in {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

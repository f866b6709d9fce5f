"""What Kafka's Java client is told to reach an embedded cluster, and how its tools are run.

The Java client takes PEM files as they are: the cluster CA as its truststore
(`ssl.truststore.type=PEM`) and, for a client certificate, one file holding the
user's PKCS#8 key followed by its certificate as its keystore (`ssl.keystore.type=PEM`,
no password: the key is not encrypted). A user without a certificate authenticates
with SASL over TLS (`SASL_SSL`), PLAIN or SCRAM, through `sasl.jaas.config`. The same
properties, each prefixed `kafka.`, are Spark's Kafka source options.

`tool` runs one of Kafka's command-line tools (`java -cp '<lib>/*' <class>`), as
`kafka-run-class.sh` does, with a JVM made for a short run and the logging of
`log4j2.properties` beside this file (warnings, and the producer's idempotence).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from epochlog_tools.devcluster.local import LocalCluster
from tests.interop.jars import KAFKA_TOOLS, located

HERE: Final = Path(__file__).resolve().parent
LOG4J2: Final = HERE / "log4j2.properties"
SHORT_RUN_JVM: Final = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")
"""The client compiler alone and one GC thread: a tool runs for seconds."""

CONSOLE_PRODUCER: Final = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER: Final = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TOPIC_COMMAND: Final = "org.apache.kafka.tools.TopicCommand"
CONSUMER_GROUP_COMMAND: Final = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSET_SHELL: Final = "org.apache.kafka.tools.GetOffsetShell"


def tls_properties(cluster: LocalCluster, user: str, directory: Path) -> dict[str, str]:
    """SSL with `user`'s client certificate (its key and certificate written to one PEM
    file in `directory`)."""
    pki = cluster.security.pki
    assert pki is not None, "the cluster runs without TLS"
    cert, key = pki.user(user)
    keystore = directory / f"{user}-keystore.pem"
    keystore.write_bytes(key.read_bytes() + cert.read_bytes())
    return {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.cluster_ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }


def sasl_properties(
    cluster: LocalCluster, mechanism: str, user: str, password: str
) -> dict[str, str]:
    """SASL_SSL as `user` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), without a certificate."""
    pki = cluster.security.pki
    assert pki is not None, "the cluster runs without TLS"
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    return {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.cluster_ca),
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="{user}" password="{password}";',
    }


def write_properties(path: Path, properties: Mapping[str, str]) -> Path:
    """A Java properties file (backslashes escaped; nothing else here needs it)."""
    lines = [f"{k}={v}".replace("\\", "\\\\") for k, v in properties.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise RuntimeError(
            "Kafka's tools need a Java runtime (`java`): apt-get install openjdk-17-jre-headless"
        )
    return found


def tool(main_class: str, args: Sequence[str]) -> list[str]:
    """The command line of one of Kafka's tools (the jars of `tests.interop.jars`)."""
    lib = located(KAFKA_TOOLS)
    return [
        java(),
        *SHORT_RUN_JVM,
        f"-Dlog4j2.configurationFile={LOG4J2}",
        "-cp",
        f"{lib}/*",
        main_class,
        *args,
    ]

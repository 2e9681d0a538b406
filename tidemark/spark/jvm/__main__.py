"""``python -m tidemark.spark.jvm``: build ``tidemark-jvm.jar`` from the Java sources (when the
package is made; needs a JDK and the PySpark it is built for)."""

from tidemark.spark.jvm import build

print(build())

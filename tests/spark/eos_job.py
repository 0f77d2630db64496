"""A streaming query copying one mq topic into another, run as its own process (its own
driver JVM) by ``test_exactly_once_sink.py`` so that the test can SIGKILL it.

    python eos_job.py BOOTSTRAP SOURCE SINK CHECKPOINT MAX_PER_TRIGGER

Runs with Trigger.AvailableNow from its checkpoint and exits 0 when it has caught up.
``local[2,4]``: a task whose Python worker is killed is retried (up to 4 attempts).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import spark_connector


def main() -> None:
    bootstrap, source, sink, checkpoint, per_trigger = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("mq-eos-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    query = (
        spark.readStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("mq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("kafka.batch.size", "2048")  # many small requests: writes take a while
        .option("kafka.linger.ms", "0")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("EOS-JOB-DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

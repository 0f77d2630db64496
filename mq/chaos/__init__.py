"""``mq chaos``: a bundled fault-injection suite (cluster, workloads, nemesis, checker).

* :mod:`mq.chaos.history`: what a run records (plain values);
* :mod:`mq.chaos.checker`: the pure history checker; :mod:`mq.chaos.planted`
  proves it on every run with planted anomalies;
* :mod:`mq.chaos.nemesis`: the faults and their seeded schedule;
  :mod:`mq.chaos.netfilter`: network partitions with nftables (root only);
* :mod:`mq.chaos.workloads`: the log and queue workloads (through :mod:`mq.client`);
* :mod:`mq.chaos.replicas`: every replica's batches read from its segment files;
* :mod:`mq.chaos.runner`: one run and a campaign of runs.

It drives a :class:`~mq.local_cluster.LocalCluster` and the public client;
it never imports the broker (an import-linter contract keeps it so).
"""

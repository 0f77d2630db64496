"""Every API of the native protocol: import this module to have them all registered.

API keys are Kafka's where mq has the same API (the bodies are mq's own
msgpack maps, not Kafka's binary layouts); mq's own APIs take keys from 1000
up, where Kafka will not collide. All APIs are at version 0.

====  =============================  ==============================================================
key   name                           purpose
====  =============================  ==============================================================
0     produce                        append record batches (acks 0 / 1 / -1)
1     fetch                          read record batches, long poll (max_wait_ms, min_bytes)
2     list_offsets                   earliest / latest offset, or the offset for a timestamp
3     metadata                       brokers, controller, topics, partitions, leaders, ISR
8     offset_commit                  commit a group's offsets
9     offset_fetch                   read a group's committed offsets
10    find_coordinator               which broker coordinates a group
11    join_group                     become a member (static with group_instance_id)
12    heartbeat                      keep membership; receive assignment and revocations
13    leave_group                    leave a group
15    describe_groups                members, assignments, state, committed offsets and lag
16    list_groups                    every group and its state
18    api_versions                   this table, with each API's version range
19    create_topics                  create topics (partitions, replication factor, configs)
20    delete_topics                  delete topics
21    delete_records                 advance partitions' log start offsets
22    init_producer_id               producer id and epoch of an idempotent producer
29    describe_acls                  the ACL bindings a filter selects
30    create_acls                    add ACL bindings
31    delete_acls                    remove the ACL bindings filters select
32    describe_configs               a topic's configs
33    alter_configs                  change or reset some of a topic's configs (incremental)
36    authenticate                   a SASL step (SCRAM); sent right after api_versions
43    elect_leaders                  move leadership back to preferred leaders (on the controller)
45    alter_partition_reassignments  start or cancel moves of partitions to new replicas
46    list_partition_reassignments   the partition moves in progress
48    describe_client_quotas         quotas per user / client id (and their defaults)
49    alter_client_quotas            set or remove quotas; applied cluster-wide by a watch
50    describe_user_scram_credentials  the SCRAM users and their mechanisms (never keys)
51    alter_user_scram_credentials   add, replace or delete users' SCRAM credentials
1000  replica_fetch                  a follower pulls from its leader (reads to the log end)
1001  internal_append                a broker appends to an internal topic led elsewhere
1002  broker_hello                   a connection proves it is a broker of this cluster
1010  queue_receive                  lease records to a share group's consumer (long poll)
1011  queue_ack                      ack, release, reject or extend leased records
1012  describe_queue                 a share group's counts per partition (visible, in flight…)
====  =============================  ==============================================================

Keys held for APIs to come (:data:`RESERVED_KEYS`); each arrives as one
``define_api`` call in an area module imported below.
"""

from __future__ import annotations

from mq.wire import (
    apis_acls,
    apis_cluster,
    apis_core,
    apis_data,
    apis_groups,
    apis_queues,
    apis_quotas,
    apis_replication,
    apis_security,
)
from mq.wire.registry import all_apis

RESERVED_KEYS: dict[int, str] = {
    42: "delete_groups",
}
"""Keys set aside for later APIs, by the name each will be declared with: group
deletion (Kafka's key)."""

AREAS = (
    apis_core,
    apis_data,
    apis_groups,
    apis_replication,
    apis_cluster,
    apis_queues,
    apis_quotas,
    apis_security,
    apis_acls,
)
"""The modules whose ``define_api`` calls make up the protocol."""

__all__ = ["AREAS", "RESERVED_KEYS", "all_apis"]

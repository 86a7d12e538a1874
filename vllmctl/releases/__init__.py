"""What a release is and when it is good, for a host and for a multi-node group: manifests, pointers, history,
the gate's verdict and the KV cache planned vs measured (pure; recording and rollback run in runner/)."""

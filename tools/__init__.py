"""Tools beside the production code (not shipped to Dataflow workers): data generators, the
offline Dataflow check, Flex Template metadata, local cluster launch and manifest rendering."""

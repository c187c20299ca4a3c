"""shardline: CLI, config, the dataset contract and the driver that chains the stages."""

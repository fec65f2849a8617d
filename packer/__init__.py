"""packer: exact token lengths, bin packing, WebDataset shard writing and the training loader."""

"""Flow control: how many jobs of one key run at once, and keys taking turns
(`concurrency`), with the key's table (`models`)."""

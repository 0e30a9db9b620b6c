"""The router network: input-queued virtual-channel routers stepped as struct-of-arrays."""

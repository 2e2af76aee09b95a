"""The SeZM (DPA4) network in torch: descriptor, blocks, heads and chunked evaluation."""

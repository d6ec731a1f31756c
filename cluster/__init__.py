"""The IPU-POD as a whole: hardware catalogue, topologies, routes, the network cost model
and the command line."""

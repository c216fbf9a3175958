"""Device planning: device catalogues, allocations that fit a budget, ``fedbench plan``, simulated time."""

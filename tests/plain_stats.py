"""Plain references of the statistics the reports compute, shared by the tests."""

import math


def plain_mean_std(values):
    """Mean and sample standard deviation (n - 1; 0.0 for one value), by explicit loops."""
    n = len(values)
    mean = 0.0
    for v in values:
        mean += float(v)
    mean /= n
    ss = 0.0
    for v in values:
        ss += (float(v) - mean) ** 2
    return mean, (math.sqrt(ss / (n - 1)) if n > 1 else 0.0)

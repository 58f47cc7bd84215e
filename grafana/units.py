"""Values formatted the way Grafana formats a panel's unit
(fieldConfig.defaults.unit), for check_run.py's table and render.py's axes
and stat panels. Python 3 standard library only.

    format_value(1.5e6, "Bps")        -> "1.50 MB/s"
    format_value(0.0123, "s")         -> "12.3 ms"
    format_value(0.425, "percentunit") -> "42.5%"
"""

import math

SI = ["", "k", "M", "G", "T", "P"]
IEC = ["", "Ki", "Mi", "Gi", "Ti", "Pi"]
COUNT = ["", "K", "M", "B", "T"]

# unit id -> (prefixes, base, suffix): Grafana's scaled units.
SCALED = {
    "Bps": (SI, 1000, "B/s"),        # bytes/sec (SI)
    "binBps": (IEC, 1024, "B/s"),    # bytes/sec (IEC)
    "bps": (SI, 1000, "b/s"),        # bits/sec (SI)
    "decbytes": (SI, 1000, "B"),     # bytes (SI)
    "bytes": (IEC, 1024, "B"),       # bytes (IEC): what Grafana shows as KiB, MiB
    "ops": (COUNT, 1000, " ops/s"),
    "opm": (COUNT, 1000, " ops/min"),
    "reqps": (COUNT, 1000, " req/s"),
    "short": (COUNT, 1000, ""),
}


def decimals_for(value):
    """Grafana's automatic decimals (getDecimalsForValue): two significant
    digits, three if the leading ones are above 2.25; none for a whole number."""
    magnitude = abs(value)
    if magnitude == 0 or not math.isfinite(magnitude) or value % 1 == 0:
        return 0
    decimals = -math.floor(math.log10(magnitude)) + 1
    if magnitude / 10 ** -decimals > 2.25:
        decimals += 1
    return max(0, decimals)


def fixed(value, decimals):
    return f"{value:.{decimals_for(value) if decimals is None else decimals}f}"


def scaled(value, prefixes, base, suffix, decimals):
    """value in the largest prefix it reaches: 1234 B/s -> 1.23 kB/s."""
    index = 0
    while abs(value) >= base and index < len(prefixes) - 1:
        value /= base
        index += 1
    space = "" if suffix.startswith(" ") or not (prefixes[index] or suffix) else " "
    return f"{fixed(value, decimals)}{space}{prefixes[index]}{suffix}"


def seconds(value, decimals):
    """Grafana's "s": ns, µs, ms below a second, s, then min, hour, day."""
    magnitude = abs(value)
    for limit, factor, suffix in ((1e-6, 1e9, "ns"), (1e-3, 1e6, "µs"), (1, 1e3, "ms"),
                                  (60, 1, "s"), (3600, 1 / 60, "min"), (86400, 1 / 3600, "hour")):
        if magnitude < limit:
            return f"{fixed(value * factor, decimals)} {suffix}"
    return f"{fixed(value / 86400, decimals)} day"


def format_value(value, unit=None, decimals=None):
    """value as Grafana shows it for unit; NaN and infinities as Grafana
    writes them; unknown units like "none"."""
    if value is None:
        return "No data"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if unit == "percentunit":
        return f"{fixed(value * 100, decimals)}%"
    if unit == "percent":
        return f"{fixed(value, decimals)}%"
    if unit == "s":
        return seconds(value, decimals)
    if unit in SCALED:
        return scaled(value, *SCALED[unit], decimals)
    return fixed(value, decimals)

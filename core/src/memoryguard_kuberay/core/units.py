"""Human-readable formatting of bytes and durations, for decision messages
and tables. Purely computational."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def fmt_bytes(value: float | None) -> str:
    """``41.2 GiB``, ``512 MiB``; ``?`` when unknown."""
    if value is None:
        return "?"
    if abs(value) >= GIB:
        return f"{value / GIB:.1f} GiB"
    if abs(value) >= MIB:
        return f"{value / MIB:.0f} MiB"
    return f"{value / 1024:.0f} KiB"


def fmt_duration(seconds: float | None) -> str:
    """``1 h 40 m``, ``12 m``, ``45 s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s < 0:
        return "now"
    if s >= 3600:
        return f"{s // 3600} h {(s % 3600) // 60:02d} m"
    if s >= 60:
        return f"{s // 60} m"
    return f"{s} s"


def fmt_oom_in(eta_s: float | None) -> str:
    """``projected OOM in 1 h 40 m``; where the trend with its peaks is at
    the OOM point already (an ETA of 0), that, in words: "OOM in 0 s" said
    of a pod at 83% in use is no time a person can act on (issue 39)."""
    if eta_s is not None and eta_s <= 0:
        return "its peaks on this trend already reach the OOM point"
    return f"projected OOM in {fmt_duration(eta_s)}"


def fmt_rate(bytes_per_hour: float | None) -> str:
    """``+4.4 GiB/h``."""
    if bytes_per_hour is None:
        return "?"
    sign = "+" if bytes_per_hour >= 0 else "-"
    return f"{sign}{fmt_bytes(abs(bytes_per_hour))}/h"

"""The fault matrix as text: one row per fault, the outcome and the counts."""

from __future__ import annotations

from collections.abc import Sequence

from .scenarios import Result


def render(results: Sequence[Result]) -> str:
    head = (f"{'fault':<78} {'rot':>3} {'fail':>4} {'evict':>5} {'false':>5} {'viol':>4} {'secs':>5} "
            f"{'RSS':>5}  outcome")
    lines = [head, "-" * len(head)]
    for r in results:
        f = r.figures
        outcome = ("ok: " + r.scenario.expect) if r.ok else ("FAILED: " + r.problem)
        if "takeover_s" in f:
            outcome += f" (takeover {f['takeover_s']} s)"
        lines.append(f"{r.scenario.fault[:78]:<78} {f['rotated']:>3} {f['failed']:>4} {f['evictions']:>5} "
                     f"{f['false']:>5} {f['violations']:>4} {r.seconds:>5.1f} {f.get('rss_peak_mib', 0):>5.0f}  "
                     f"{outcome}")
        lines.extend(f"{'':<8}violation: {v}" for v in r.violations)
    total = sum(len(r.violations) for r in results)
    lines.append(f"{len(results)} fault(s), {sum(1 for r in results if r.ok)} as expected, "
                 f"{total} invariant violation(s); RSS: the operator's peak resident set, MiB")
    return "\n".join(lines)

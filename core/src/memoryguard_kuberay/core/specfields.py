"""The MemoryGuard spec's operator sections, described once: every field
with its type, default, bounds, pattern and the words that refuse it
(``schema.Field``, the one kind of description), and every rule that spans
fields, as CEL and as Python. From this table ``specschema.py`` generates the
CRD's schema (CEL included), ``guardspec.py`` reads a spec into its typed
sections, and ``settings_table()`` writes the docs' settings table; a test
holds the three equal. The policy's own fields (``spec.policy``, most of
``spec.rotation``, ``includeHead``, ``dryRun``) are the core's
``POLICY_FIELDS``, read, published and printed the same way. Purely
computational.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping
from typing import Any

from memoryguard_kuberay.core import settings as core_settings
from memoryguard_kuberay.core import trust as tr
from memoryguard_kuberay.core.constants import SIDECAR_PORT
from memoryguard_kuberay.core.schema import Field, Kind, Rule, check, docs_row, said


@dataclasses.dataclass(frozen=True)
class ObjectRule:
    """A rule across the fields of one object (``path``: "" for the spec)."""

    path: str
    cel: str
    message: str
    # On the values read (by dotted path) and the policy settings read.
    holds: Callable[[Mapping[str, Any], core_settings.PolicySettings], bool]


class Mode(str, enum.Enum):
    """What a remediation does: nothing, an Event, or a patch."""

    OFF = "off"
    RECOMMEND = "recommend"
    AUTO = "auto"


MODES = tuple(m.value for m in Mode)


DEFAULT_JEMALLOC_PATH = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
DEFAULT_MALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"
DEFAULT_SIDECAR_IMAGE = "ghcr.io/memoryguard/memoryguard-sidecar:0.1.0"
# Values that end up in pod templates are checked against these before any
# patch: no shell, no newlines, nothing that could smuggle another variable.
SAFE_PATH = r"^/[A-Za-z0-9._/+-]{1,255}$"
SAFE_MALLOC_CONF = r"^[a-z_]+:[A-Za-z0-9_.-]+(,[a-z_]+:[A-Za-z0-9_.-]+){0,15}$"
SAFE_IMAGE = r"^[a-z0-9]([a-z0-9._/:@-]{0,254})$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$"
# Kubernetes label keys and values: checked before they are joined into a
# selector string (a key like "a!" would otherwise select everything).
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
GROUP_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"  # a non-empty label value

_RESERVED = ", ".join(str(p) for p in sorted(tr.RESERVED_PORTS))
NOT_RESERVED = Rule(f"!(self in [{_RESERVED}])",
                    "this port is taken in a Ray pod: not one of " + ", ".join(
                        f"{p} ({who})" for p, who in sorted(tr.RESERVED_PORTS.items())),
                    lambda v: v not in tr.RESERVED_PORTS)
NO_PARENT = Rule(f"!self.matches(r'{tr.PARENT_REGEX}')", "a spilling directory may not contain '..'",
                 lambda v: not re.search(tr.PARENT_REGEX, v))
NO_SYSTEM_DIR = Rule(f"!self.matches(r'{tr.SYSTEM_DIR_REGEX}')",
                     "a spilling directory may not be a system directory (" + ", ".join(
                         "/" + d for d in tr.SYSTEM_DIRS) + ")",
                     lambda v: not re.search(tr.SYSTEM_DIR_REGEX, v))
LABEL_KEYS = Rule(f"self.all(k, k.matches(r'{LABEL_KEY}'))", "matchLabels keys must be label keys ([prefix/]name)",
                  lambda v: all(isinstance(k, str) and len(k) <= 317 and re.match(LABEL_KEY, k) for k in v))
_MODE_DOC = "off: nothing; recommend: Event and status only; auto: patch the worker group's pod template"

# Objects that get a default of {} (so their fields' defaults fill in), and
# their descriptions.
SECTIONS: dict[str, str] = {
    "policy": "When a worker is at risk: the thresholds, trends and durations the policy judges by.",
    "rotation": "How an at-risk worker is replaced, and the budgets that bound it.",
    "ladder": "The graded response before a rotation: reclaim, then shed, then replace, each step judged by "
              "its effect (docs/how-it-works.md, The ladder).",
    "sampling": "How the sidecars are polled.",
    "remediation": "What to change in the worker groups' pod templates when the policy advises it.",
    "remediation.jemalloc": "jemalloc for fragmentation (a plateau).",
    "remediation.spilling": "Object spilling for a filling object store.",
    "remediation.review": "Whether a jemalloc remediation worked: once pods on the patched template have a "
                          "trend, their creep is compared with the pods' before it (status.remediations, an "
                          "Event); `simulate --before --after` gives the same review offline.",
    "sidecar": "The sidecar the operator injects into the guarded RayClusters' pod templates.",
    "forensics": "The evidence kept before a rotation (memory, processes, Ray objects by call site), in "
                 "ConfigMaps owned by the guard: `memoryguard-kuberay forensics` prints them.",
    "remediation.callSites": "Ray records where each object reference was created "
                             "(RAY_record_ref_creation_sites=1), so the evidence names the leaking line. Costs a "
                             "stack walk per ray.put and task call.",
}
SECTION_DOCS: dict[str, str] = {
    "clusterSelector": "Which RayClusters in this namespace to guard: by name, by label, or both.",
    "rotation.podDisruptionBudget": "Keep a PodDisruptionBudget per guarded worker group (evictions honour it; "
                                    "kubelet's own pressure evictions do not). It is written with an integer "
                                    "minAvailable (the group's desired pods less maxUnavailable), the only form "
                                    "the disruption controller can compute for RayCluster pods.",
    "sidecar.resources": "The injected sidecar's resources.",
}

FIELDS: tuple[Field, ...] = (
    Field("clusterSelector.names", Kind.STRINGS, None, "RayClusters to guard, by name.", pattern=DNS_LABEL,
          max_items=100, max_length=63, problem="must be a list of RayCluster names"),
    Field("clusterSelector.matchLabels", Kind.LABELS, None, "RayClusters to guard, by label.",
          pattern=LABEL_VALUE, max_items=32, max_length=63, rules=(LABEL_KEYS,),
          problem="must map label keys to label values"),
    # KubeRay labels each pod with its group's name (ray.io/group): a label value.
    Field("workerGroups", Kind.STRINGS, None, "Worker groups to guard (empty: all).", pattern=GROUP_NAME,
          max_items=100, max_length=63, problem="must be a list of worker group names (label values, at most 63 "
                                                "characters)"),
    Field("sampling.intervalSeconds", Kind.INT, 15, "How often each pod's sidecar is polled.", "s", 1, 3600),
    # Below 1024: the well-known ports (ssh, ...), a host's and never a sidecar's.
    Field("sampling.sidecarPort", Kind.INT, SIDECAR_PORT, "The sidecar's port on the pod IP.", "port", 1024, 65535,
          rules=(NOT_RESERVED,)),
    Field("sampling.timeoutSeconds", Kind.NUMBER, 5, "Timeout of one poll (all its pages).", "s", 0.1, 60),
    Field("rotation.replacementTimeoutSeconds", Kind.INT, 900,
          "How long to wait for KubeRay's replacement to be Running and Ready before the rotation is reported as "
          "failed.", "s", 30, 86400),
    Field("rotation.evictionTimeoutSeconds", Kind.INT, 600,
          "How long a rotation may keep asking for an eviction that is refused (429: a PodDisruptionBudget says "
          "not now; or the API failing) before it is reported as failed, its marks are taken off the pod and its "
          "slot is released (after at least 3 refused attempts).",
          "s", 30, 86400),
    Field("rotation.podDisruptionBudget.enabled", Kind.BOOL, False, "Keep a PodDisruptionBudget per worker group."),
    Field("rotation.podDisruptionBudget.maxUnavailable", Kind.INT, 1, "Pods of a group that may be disrupted at "
          "once (the budget's minAvailable is the group's desired pods less this).", "pods", 1, 100),
    Field("remediation.jemalloc.mode", Kind.STRING, Mode.OFF.value, f"{_MODE_DOC} (LD_PRELOAD, MALLOC_CONF).",
          choices=MODES, max_length=16, problem="must be one of off, recommend, auto"),
    Field("remediation.jemalloc.libraryPath", Kind.STRING, DEFAULT_JEMALLOC_PATH,
          "The jemalloc library to LD_PRELOAD (the operator allows only its installer's list).", pattern=SAFE_PATH,
          max_length=256, problem="must be an absolute path of letters, digits, '.', '_', '-', '+' and '/'"),
    Field("remediation.jemalloc.mallocConf", Kind.STRING, DEFAULT_MALLOC_CONF, "MALLOC_CONF for jemalloc.",
          pattern=SAFE_MALLOC_CONF, max_length=512, problem="must look like 'key:value,key:value'"),
    Field("remediation.spilling.mode", Kind.STRING, Mode.OFF.value, f"{_MODE_DOC} (RAY_object_spilling_* env).",
          choices=MODES, max_length=16, problem="must be one of off, recommend, auto"),
    Field("remediation.spilling.thresholdPercent", Kind.INT, 80, "Spill when the store is this full.", "percent",
          1, 100),
    Field("remediation.spilling.minSpillingSizeBytes", Kind.INT, 100 * 1024 * 1024, "Smallest batch to spill.",
          "bytes", 0, 2**40),
    Field("remediation.spilling.directories", Kind.STRINGS, ["/tmp/ray-spill"], "Where to spill.",
          pattern=SAFE_PATH, min_items=1, max_items=16, max_length=256, rules=(NO_PARENT, NO_SYSTEM_DIR),
          problem="must be a non-empty list of absolute paths"),
    Field("remediation.review.afterSeconds", Kind.INT, 21600, "Time after a remediation is applied before it is "
          "judged (and pods on its template must each have a trend).", "s", 600, 7 * 86400),
    Field("remediation.review.minPods", Kind.INT, 2, "Pods on the remediated template, each with a trend, that "
          "the review needs.", "pods", 1, 100),
    Field("remediation.review.revert", Kind.STRING, "never", "ineffective: undo a remediation judged no effect "
          "or worse (the patch taken back exactly; pods get it as they are replaced); never: only say so.",
          choices=("never", "ineffective"), max_length=16, problem="must be one of never, ineffective"),
    Field("remediation.callSites.mode", Kind.STRING, Mode.OFF.value, f"{_MODE_DOC} "
          "(RAY_record_ref_creation_sites=1, advised when the evidence of a rotation found no call sites).",
          choices=MODES, max_length=16, problem="must be one of off, recommend, auto"),
    Field("forensics.enabled", Kind.BOOL, True, "Keep the evidence of what leaked before each rotation.",
          problem="must be true or false"),
    Field("forensics.timeoutSeconds", Kind.INT, 30, "Time given to collect it; the rotation waits at most this "
          "long (then drains with what came in).", "s", 5, 300),
    Field("forensics.keep", Kind.INT, 20, "Artifacts kept per guard (the oldest are deleted).", "ConfigMaps", 1,
          200),
    Field("sidecar.inject", Kind.BOOL, False, "Add the sidecar to the guarded RayClusters' pod templates.",
          problem="must be true or false"),
    Field("kuberay.allowRecreate", Kind.BOOL, False, "Let MemoryGuard change the pod templates (sidecar, "
          "remediation) of a RayCluster whose upgradeStrategy is Recreate, where KubeRay then deletes and "
          "recreates every pod of the cluster, head included, on each change. Off: such a cluster's templates "
          "are left alone and the guard says so.", problem="must be true or false"),
    Field("sidecar.image", Kind.STRING, None, "Default: the sidecar image the chart was installed with (and only "
          "images of the repositories the installer allows).", pattern=SAFE_IMAGE, max_length=255,
          problem="is not a valid image reference"),
    Field("sidecar.port", Kind.INT, SIDECAR_PORT, "The sidecar's port.", "port", 1024, 65535, rules=(NOT_RESERVED,)),
    Field("sidecar.resources.cpuRequest", Kind.STRING, "10m", "CPU request (at most 1).", "quantity",
          pattern=QUANTITY, max_length=32, problem="is not a quantity"),
    Field("sidecar.resources.memoryRequest", Kind.STRING, "32Mi", "Memory request (at most the limit).",
          "quantity", pattern=QUANTITY, max_length=32, problem="is not a quantity"),
    Field("sidecar.resources.memoryLimit", Kind.STRING, "64Mi", "Memory limit (at most 512Mi).", "quantity",
          pattern=QUANTITY, max_length=32, problem="is not a quantity"),
)

OBJECT_RULES: tuple[ObjectRule, ...] = (
    ObjectRule("clusterSelector", "(has(self.names) && size(self.names) > 0) || "
                                  "(has(self.matchLabels) && size(self.matchLabels) > 0)",
               "clusterSelector needs names or matchLabels",
               lambda v, p: bool(v.get("clusterSelector.names") or v.get("clusterSelector.matchLabels"))),
    ObjectRule("", "!has(self.sidecar) || !self.sidecar.inject || !has(self.sampling) || "
                   "self.sidecar.port == self.sampling.sidecarPort",
               "sidecar.port and sampling.sidecarPort must agree when the sidecar is injected",
               lambda v, p: not v.get("sidecar.inject") or v.get("sidecar.port") == v.get("sampling.sidecarPort")),
    ObjectRule("", "!has(self.sampling) || !has(self.policy) || "
                   "double(self.sampling.intervalSeconds) < double(self.policy.staleAfterSeconds)",
               "sampling.intervalSeconds must be shorter than policy.staleAfterSeconds, or every sample would be "
               "stale",
               lambda v, p: float(v.get("sampling.intervalSeconds") or 0) < p.stale_after_s),
)


# -- the reader -------------------------------------------------------------------------
_BY_PATH = {f.path: f for f in FIELDS}


def default(path: str) -> Any:
    """The default of the field at ``path`` (a list's as a tuple)."""
    d = _BY_PATH[path].default
    return tuple(d) if isinstance(d, list) else d


def read(spec: Mapping[str, Any], policy: core_settings.PolicySettings) -> tuple[dict[str, Any], list[str]]:
    """Every field of the table read from ``spec`` (defaults where absent):
    (values by dotted path, problems in words a person understands). A value
    refused is replaced by its default, so every problem is found at once.
    ``policy``: the core's settings read from the same spec, for the rules
    that span both."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    objects_said: set[str] = set()
    for f in FIELDS:
        node: Any = spec
        parts = f.path.split(".")
        for i, part in enumerate(parts[:-1]):
            node = node.get(part) if isinstance(node, Mapping) else None
            if node is not None and not isinstance(node, Mapping):
                where = ".".join(parts[:i + 1])
                if where not in objects_said:
                    objects_said.add(where)
                    problems.append(f"spec.{where} must be an object")
                node = None
        raw = node.get(parts[-1]) if isinstance(node, Mapping) else None
        if raw is None:
            values[f.path] = tuple(f.default) if isinstance(f.default, list) else f.default
            continue
        value, problem = check(f, raw)
        if problem is not None:
            problems.append(said(f, problem))
            value = tuple(f.default) if isinstance(f.default, list) else f.default
        values[f.path] = value
    for r in OBJECT_RULES:
        if not r.holds(values, policy):
            problems.append(f"spec.{r.path + ': ' if r.path else ''}{r.message}" if r.path != "clusterSelector"
                            else "spec.clusterSelector needs names or matchLabels: a guard must say which "
                                 "RayClusters it guards")
    return values, problems


# -- the whole spec ----------------------------------------------------------------------------
# The rotation fields the operator reads itself (the rest of spec.rotation is the core's policy).
OPERATOR_ROTATION_KEYS = frozenset(f.path.split(".")[1] for f in FIELDS if f.path.startswith("rotation."))
_POLICY_TOP = ("policy", "ladder", "includeHead", "dryRun")


def policy_part(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a spec the core's policy settings read (``PolicySettings.from_spec``)."""
    out: dict[str, Any] = {k: spec[k] for k in _POLICY_TOP if k in spec}
    rotation = spec.get("rotation")
    if isinstance(rotation, Mapping):
        out["rotation"] = {k: v for k, v in rotation.items() if k not in OPERATOR_ROTATION_KEYS}
    elif rotation is not None:
        out["rotation"] = rotation
    return out


def _known_tree() -> dict[str, Any]:
    """Every field of the spec as a tree of names (None: a leaf or a free map)."""
    tree: dict[str, Any] = {}
    for path in (f.path for f in (*core_settings.POLICY_FIELDS, *FIELDS)):
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = None
    return tree


KNOWN = _known_tree()


def unknown_fields(spec: Mapping[str, Any]) -> list[str]:
    """Fields the spec has that no table knows, each with the nearest known
    name: a server prunes them (or refuses them, as kubectl asks), and a
    misspelt ``polcy:`` would otherwise leave every default in force."""
    import difflib

    out: list[str] = []

    def walk(node: Mapping[str, Any], known: Mapping[str, Any], where: str) -> None:
        for key in list(node)[:200]:
            name = str(key)
            if name not in known:
                near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
                hint = f" (did you mean {where}.{near[0]}?)" if near else ""
                out.append(f"{where}.{name[:60]}: unknown field{hint}")
            elif isinstance(known[name], Mapping) and isinstance(node[key], Mapping):
                walk(node[key], known[name], f"{where}.{name}")

    walk(spec, KNOWN, "spec")
    return out


# -- the docs -------------------------------------------------------------------------------
def settings_table() -> str:
    """The docs' table of every spec field: the core's and the operator's."""
    rows = ["| spec field | default | unit | meaning |", "|---|---|---|---|"]
    rows += [docs_row(f) for f in (*core_settings.POLICY_FIELDS, *FIELDS)]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(settings_table())

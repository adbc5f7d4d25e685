"""The architectures a demo compares (``fairseq-attn-demo --archs``), from fairseq's registry."""

from typing import List

from fairseq_attn_reports import table1
from fairseq_attn_reports.arch_names import cached_names


class DemoError(RuntimeError):
    pass


def registered_archs() -> List[str]:
    """Architectures of the plugin model, read from fairseq's registry (kept in the names' cache:
    the demo starts without torch and fairseq while the code is unchanged)."""
    return cached_names("attn_archs", _read_registry)


def _read_registry() -> List[str]:
    from fairseq_attn_plugins.models import attn_architectures
    return attn_architectures()


def resolve_archs(spec: str) -> List[str]:
    known = registered_archs()
    if spec == "table1":  # every row of the CSAN paper's Table 1; a missing one is an error
        try:
            return [row.arch for row in table1.resolve_rows("all")]
        except table1.Table1Error as e:
            raise DemoError(f"--archs table1: {e}; or list the architectures with --archs A,B,...") from None
    if spec == "all":  # every base-size variant (big ones are the same models with other defaults)
        base = [a for a in known if not a.endswith("_big")]
        return ["transformer_attn_wmt_en_de"] + [a for a in base if a != "transformer_attn_wmt_en_de"]
    archs = [a.strip() for a in spec.split(",") if a.strip()]
    bad = [a for a in archs if a not in known]
    if bad:
        raise DemoError(f"--archs: unknown architecture(s) {', '.join(bad)}; registered by "
                        f"fairseq_attn_plugins: {', '.join(known)} (or 'all')")
    if len(archs) != len(set(archs)):
        raise DemoError("--archs: an architecture is listed twice")
    return archs

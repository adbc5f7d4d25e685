"""What a fairseq command line names, read without fairseq (and without torch): used by the
plugin's refusals and by the recipes' argument errors alike."""


def arch_of(argv) -> str:
    """The architecture named on a fairseq command line (``--arch A``, ``--arch=A``, ``-a A``), or ''."""
    for i, a in enumerate(argv):
        if a.startswith("--arch="):
            return a.split("=", 1)[1]
        if a in ("--arch", "-a") and i + 1 < len(argv):
            return argv[i + 1]
    return ""

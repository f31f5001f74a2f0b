"""The trainer archive: what `pulumi up` uploads and `trainstack local` stages, built one way.

The archive holds the ``trainer`` package's Python files at ``trainer/...``, so a node runs
it with ``PYTHONPATH=trainer.zip python -m trainer.task``. Only the trainer ships: the
launchers and tests that drive it locally stay in the repository.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
TRAINER_SOURCE = REPOSITORY / "trainer"
# A fixed timestamp: the same files give the same archive bytes, run after run.
_ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)


def trainer_archive_members(source: Path = TRAINER_SOURCE) -> dict[str, Path]:
    """Archive name -> file, in a stable order: every ``*.py`` of the package, no caches."""
    files = sorted(p for p in source.rglob("*.py") if "__pycache__" not in p.parts)
    return {(Path(source.name) / p.relative_to(source)).as_posix(): p for p in files}


def write_trainer_archive(destination: Path, source: Path = TRAINER_SOURCE) -> Path:
    """The archive as a zip file at ``destination`` (the bucket object's bytes)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in trainer_archive_members(source).items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    return destination

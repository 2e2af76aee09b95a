"""Entry point of mdband's ASE io plugin (group ``ase.ioformats``, name ``mdband-h5md``).

ASE loads every entry point of that group when ``ase.io`` is imported, so this module sits
outside the ``mdband`` package: importing it costs nothing beyond ASE itself. The reader is
:mod:`mdband.io.ase_h5md`, imported only when a file is read.
"""

from ase.utils.plugins import ExternalIOFormat

mdband_h5md = ExternalIOFormat(
    desc="H5MD trajectory written by mdband",
    code="+S",
    module="mdband.io.ase_h5md",
    ext=["h5", "h5md"],
    magic=b"\x89HDF\r\n\x1a\n",
)

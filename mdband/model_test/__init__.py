"""``mdband test``: deepmd-kit's ``dp test`` for mdband (errors against labelled frames).

* :mod:`~mdband.model_test.metrics`: the quantities, their weights and report lines;
* :mod:`~mdband.model_test.details`: the ``--detail-file`` files, in deepmd-kit's layout;
* :mod:`~mdband.model_test.runner`: systems from data paths, batched evaluation, the report.
"""

from mdband.model_test.details import DetailFileError, DetailWriter
from mdband.model_test.metrics import KEYS, merge, system_errors
from mdband.model_test.runner import ModelTestReport, read_test_systems, report_text, run_test

__all__ = [
    "KEYS",
    "DetailFileError",
    "DetailWriter",
    "ModelTestReport",
    "merge",
    "read_test_systems",
    "report_text",
    "run_test",
    "system_errors",
]

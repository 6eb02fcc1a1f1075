"""Moved to `roberta.inputs.rows`. This old path stays importable for users: it is that module
itself under its old name (its names, private ones too), so code written against it keeps working."""

import sys

from roberta.inputs import rows

sys.modules[__name__] = rows

"""Moved to `roberta.runtime.int8`. This old path stays importable for users: it is that module
itself under its old name (its names, private ones too), so code written against it keeps working."""

import sys

from roberta.runtime import int8

sys.modules[__name__] = int8

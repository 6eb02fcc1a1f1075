"""Moved to `roberta.runtime.onnx_model`. This old path stays importable for users: it is that module
itself under its old name (its names, private ones too), so code written against it keeps working."""

import sys

from roberta.runtime import onnx_model

sys.modules[__name__] = onnx_model

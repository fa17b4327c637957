"""Importers from other model formats to gdv's graph-stage IR: ONNX (`gdv.frontends.onnx`)."""

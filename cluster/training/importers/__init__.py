"""Importers: a user's own network (a PyTorch factory or an ONNX file) as a :class:`Workload`.

torch, torchvision and onnx are the optional extra ``pip install -e '.[torch]'``; every
module here imports them lazily, inside the function that needs them, so the base install
(and ``import cluster``) works without them.
"""

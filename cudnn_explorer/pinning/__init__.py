"""Pinned convolutions: a model's convolutions run the engine configs of a plan file
through the ``cudnn_explorer::conv`` op (csrc/conv_op.cpp), with no search and the same
plans in every process. ``op`` loads plans and registers the op's fake implementation,
``functional`` has conv functions shaped like ``torch.nn.functional``'s and the context
that routes those to the op, ``modules`` pins and unpins a model's layers."""

"""The scale planner: collectives, step time and the DP/TP/PP/ZeRO choice, predicted.

- ``collectives``: alpha-beta cost of NCCL collectives (ring, tree, hierarchical), from interconnect
  presets or calibrated on ``gpudoctor bench`` bus-bandwidth curves.
- ``train``: FLOPs and communication per layer for a transformer, the pipeline bubble, and the
  layouts that fit memory (``gpudoctor memory``) ranked by predicted step time.
"""

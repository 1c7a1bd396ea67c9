"""inference-operator: runs vLLM inference servers declared as InferenceServer custom resources."""

__version__ = "0.1.0"

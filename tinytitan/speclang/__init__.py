"""The spec language: spec/*.yaml compiled into request validators and token-event state machines."""

from .load import ProtocolSpec, SpecError, load_protocol, spec_dir

__all__ = ["ProtocolSpec", "SpecError", "load_protocol", "spec_dir"]

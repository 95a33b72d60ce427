from .top import (StatusCode, CauseCode, instruction_layout, INSTRUCTION_LAYOUTS, ImemWrite,
                  SignalMessage, Coprocessor)

__all__ = ["StatusCode", "CauseCode", "instruction_layout", "INSTRUCTION_LAYOUTS",
           "ImemWrite", "SignalMessage", "Coprocessor"]

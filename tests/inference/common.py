"""Constants shared by the inference tests."""

# One tool for the chat-template and tool-parsing tests
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "description": "Move one cell.",
            "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
        },
    }
]

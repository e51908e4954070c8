"""The document a command prints under `--json` when it produced none: a refused input (exit 2) or
an internal error (exit 70), as `floorfirst.error/1` (schemas/error.schema.json is written from this
model by schemas/generate.py). Apart from floorfirst/results.py so that an error line does not
build every document's model.

Does not: decide what is a user's error (cli.main does) or print (cli.errors does).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from floorfirst.contracts import schema_name


class ErrorResult(BaseModel):
    """A refused input (exit 2) or an internal error (exit 70) under --json: the same line stderr carries, as one
    document on stdout."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    command: ClassVar[str] = "error"

    error: str = Field(description="The one line stderr carries after 'floorfirst: error: ' (or 'floorfirst: ' for an "
                                   "internal error): what was refused and why.")
    exit_code: Literal[2, 70] = Field(description="The process's exit code: 2 a bad input, 70 an internal error (a bug: "
                                                  "please report it).")

    def document(self) -> dict[str, Any]:
        """The JSON document: `schema`, then the fields (what Document.document() gives a typed result)."""
        return {"schema": schema_name(self.command), "error": self.error, "exit_code": self.exit_code}

"""One request value: what a page, a CLI command or a notebook call asks to see (config, text, decoder text, part,
layer), frozen and hashable, so it is made once (the sidebar, the CLI's flags), handed along as one argument and
used as it is as a cache key.

    Selection(config, text, target=None, part=None, layer=0)
    sel.at(layer=3)           the same request at another layer (or part)
    sel.at_every_layer()      ... over every layer (layer None: what reads them all)
    sel.edited(heads=4)       ... with other what-ifs (Config.replace)
    sel.recorded              what one model pass depends on (model, device, text, target): the recording's key
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mha_viz.config import Config


@dataclass(frozen=True)
class Selection:
    """The settings, the text (and an encoder-decoder's decoder text), the attention kind and the layer."""

    config: Config
    text: str
    target: str | None = None  # the decoder's text (encoder-decoder models), else None
    part: str | None = None  # "encoder" | "decoder" | "cross"; None: the model's first (LoadedModel.part)
    layer: int | None = 0  # None: every layer (what reads them all, keyed without the shown one)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", self.target or None)  # "" and None ask for the same thing

    def at(self, layer: int | None = None, part: str | None = None) -> Selection:
        """The same request at another layer and/or part (each left out: as it is)."""
        return dataclasses.replace(
            self, layer=self.layer if layer is None else layer, part=self.part if part is None else part
        )

    def at_every_layer(self) -> Selection:
        """The same request over every layer (layer None): the key of what reads them all, whichever is shown."""
        return dataclasses.replace(self, layer=None)

    def edited(self, **changes: object) -> Selection:
        """The same request with settings changed (``Config.replace``: what-ifs, say ``heads=4``)."""
        return dataclasses.replace(self, config=self.config.replace(**changes)) if changes else self

    def with_text(self, text: str) -> Selection:
        """The same request on another text (a second sentence)."""
        return dataclasses.replace(self, text=text)

    @property
    def recorded(self) -> tuple[str, str, str, str | None]:
        """What one recorded model pass depends on: (model, device, text, target)."""
        return (self.config.model_name, self.config.model_device, self.text, self.target)

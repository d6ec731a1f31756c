"""``ipupod plan``: the layouts of a model on a topology, searched and priced by the same
step pricing and memory check as ``ipupod train`` (:mod:`.space`, :mod:`.search`,
:mod:`.report`)."""

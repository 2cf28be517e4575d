"""Claims F10 (γ/β), F12 (token identity through depth), F14 (DyT saturation): see ``findings`` for the rules."""

CLAIMS: tuple = ()

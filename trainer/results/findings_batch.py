"""Claims F8 (batch composition) and F9 (padding and BN statistics): see ``findings`` for the rules."""

CLAIMS: tuple = ()

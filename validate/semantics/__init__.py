"""Z3 meaning of every op, one file per op family."""

"""`vllmctl tune`, pure parts: the candidates the sweep may try and the order it tries them in
(search.py), and a candidate's goodput under an SLO (goodput.py). runner/tune/sweep.py runs them on a
replica."""

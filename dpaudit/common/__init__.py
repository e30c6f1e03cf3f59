"""The ground floor: what every other part of dpaudit may use, and which uses nothing of dpaudit.

- :mod:`.errors`: the one user-error type (a one-line message, exit code 2);
- :mod:`.figures`: how privacy figures are printed (claims rounded up, lower bounds down);
- :mod:`.progress`: progress bars that also print in a log;
- :mod:`.resources`: what this machine has (memory, disk) and how a cost is said;
- :mod:`.extras`: which optional extra a command needs, and the one message when it is missing.
"""

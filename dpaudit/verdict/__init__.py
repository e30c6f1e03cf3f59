"""What an attack run concludes: the headline lower bound of its audits against the claim (:mod:`.headline`)."""

"""One module per planted trap, each defining ``TRAP``; see ``gpudoctor.lab.registry``."""

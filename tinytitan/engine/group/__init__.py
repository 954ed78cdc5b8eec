"""One model over several processes: the group (mx.distributed) and the lockstep every rank decodes in."""

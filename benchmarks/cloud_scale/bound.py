"""The machine's bound on a commit against the simulated account.

On one machine the simulated account and the committing engine share the CPUs, so a run can be
held back by the account (the operations it served / its rate), by the engine's own CPU spread
over the CPUs, or by the engine's and the simulator's CPU together. The largest of the three is
the fastest the run could have been on this machine; its name says which one held the run back.
"""

from __future__ import annotations

ACCOUNT = "account"
ENGINE_CPU = "engine CPU"
ENGINE_AND_SIMULATOR_CPU = "engine + simulator CPU"


def machine_bound(account_bound_s: float, engine_cpu_s: float, service_cpu_s: float,
                  cpus: int) -> tuple[float, str]:
    """max(account bound, engine CPU / CPUs, (engine + service CPU) / CPUs), and which term.

    Ties go to the earlier term (the account first): a run the account holds back is not
    reported as CPU-bound because the machine happened to be as slow.
    """
    if cpus < 1:
        raise ValueError(f"machine_bound: cpus must be at least 1, got {cpus}")
    terms = ((ACCOUNT, account_bound_s), (ENGINE_CPU, engine_cpu_s / cpus),
             (ENGINE_AND_SIMULATOR_CPU, (engine_cpu_s + service_cpu_s) / cpus))
    name, value = terms[0]
    for term, term_value in terms[1:]:
        if term_value > value:
            name, value = term, term_value
    return value, name

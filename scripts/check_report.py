"""How the scripts/check_*.py checks report (the tests run them): each problem on its own line,
then one summary line; exit status 1 when there is a problem, 0 otherwise."""


def report(problems, failed, passed):
    """Prints `problems`, then `failed` when there are any and `passed` otherwise; returns the exit status."""
    for p in problems:
        print(p)
    print(failed if problems else passed)
    return 1 if problems else 0

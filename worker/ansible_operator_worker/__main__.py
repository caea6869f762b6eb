"""`python -m ansible_operator_worker`: the zygote, with the control socket on standard input."""

from ansible_operator_worker.zygote import main

if __name__ == "__main__":
    main()

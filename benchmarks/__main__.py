import sys

from jaxrl_async.trainer.runtime import configure_cpu_runtime

# before anything starts JAX (as the jaxrl-async command does): the devices case compares one core with all
configure_cpu_runtime()

from jaxrl_async.cli.bench.suite import main  # noqa: E402

sys.exit(main())

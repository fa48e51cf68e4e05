import sys

from jaxrl_async.bench.suite import main
from jaxrl_async.sharding import expose_cpu_cores

expose_cpu_cores()  # as the jaxrl-async command does: the devices case compares one core with all
sys.exit(main())

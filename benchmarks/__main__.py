import sys

from jaxrl_async.bench.suite import main

sys.exit(main())

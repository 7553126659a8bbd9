"""``python -m hipdnn_iree.cli``."""
import sys

from hipdnn_iree.cli.main import main

sys.exit(main())

"""`python -m keras_gen` runs the `keras-gen` command."""

import sys

from keras_gen.cli import main

sys.exit(main())

from kernelwiki.cli import main

raise SystemExit(main())

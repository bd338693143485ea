from attndyn.cli import main

raise SystemExit(main())

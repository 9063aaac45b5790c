// The theme set before the first paint: built (build.mjs) as the classic script
// theme.js, which index.html and course.html load in <head>, ahead of their
// stylesheet and of main.js and course.js (modules, which run only once the page
// is parsed; a dark system's learner saw the light page flash until then).
import { applyTheme } from './theme.js';

applyTheme();
